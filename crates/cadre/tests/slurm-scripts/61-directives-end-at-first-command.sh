#!/bin/bash
#SBATCH -N 2
echo start
#SBATCH -N 3
#SBATCH -t 9
echo done
