#!/bin/bash
#SBATCH --gpus-per-node=a100:2
echo done
