#!/bin/bash
#SBATCH --array=1,3,5-7
#SBATCH -o arr-%A_%a.out
echo done
