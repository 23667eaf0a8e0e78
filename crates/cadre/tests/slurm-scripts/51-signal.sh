#!/bin/bash
#SBATCH --signal=B:USR1@90
echo done
