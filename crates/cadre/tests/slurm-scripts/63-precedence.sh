#!/bin/bash
# args: -J fromcli
# env: SBATCH_TIMELIMIT=10 SBATCH_JOB_NAME=fromenv SBATCH_ACCOUNT=envacct
#SBATCH -t 5
#SBATCH -J fromscript
#SBATCH -A scriptacct
echo done
