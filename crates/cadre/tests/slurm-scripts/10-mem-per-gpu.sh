#!/bin/bash
#SBATCH --mem-per-gpu=8G
#SBATCH --gpus-per-node=2
echo done
