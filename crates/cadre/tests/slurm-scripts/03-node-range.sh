#!/bin/bash
#SBATCH -N 2-3
#SBATCH -n 8
#SBATCH --ntasks-per-node=4
echo done
