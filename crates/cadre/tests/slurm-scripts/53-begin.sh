#!/bin/bash
#SBATCH --begin=now+1hour
echo done
