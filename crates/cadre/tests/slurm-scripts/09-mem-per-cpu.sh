#!/bin/bash
#SBATCH --mem-per-cpu=1536
#SBATCH -n 3
echo done
