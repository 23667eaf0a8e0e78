#!/bin/bash
#SBATCH --gpus=2
#SBATCH --cpus-per-gpu=2
#SBATCH -c 2
echo done
