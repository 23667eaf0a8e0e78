#!/bin/bash
#SBATCH -n 4
#SBATCH --ntasks-per-node=2
echo done
