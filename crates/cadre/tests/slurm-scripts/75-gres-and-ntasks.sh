#!/bin/bash
#SBATCH -N 2
#SBATCH -n 3
#SBATCH --gres=gpu:1
echo done
