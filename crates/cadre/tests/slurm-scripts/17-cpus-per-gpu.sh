#!/bin/bash
#SBATCH --gpus-per-node=2
#SBATCH --cpus-per-gpu=4
echo done
