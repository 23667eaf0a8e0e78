#!/bin/bash
# args: -N 1 --time=20
#SBATCH -N 3
#SBATCH -t 5
echo done
