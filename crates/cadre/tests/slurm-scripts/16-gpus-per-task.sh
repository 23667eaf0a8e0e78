#!/bin/bash
#SBATCH -n 4
#SBATCH --gpus-per-task=1
echo done
