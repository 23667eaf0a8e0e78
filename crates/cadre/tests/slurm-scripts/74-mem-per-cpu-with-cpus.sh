#!/bin/bash
#SBATCH --mem-per-cpu=2G
#SBATCH -c 4
echo done
