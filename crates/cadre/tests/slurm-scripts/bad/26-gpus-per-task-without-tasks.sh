#!/bin/bash
#SBATCH --gpus-per-task=1
echo done
