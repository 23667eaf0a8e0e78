#!/bin/bash
#SBATCH --hold
#SBATCH -n 2
echo done
