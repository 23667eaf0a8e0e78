#!/bin/bash
#SBATCH -N 2
#SBATCH --gres=gpu:2
echo done
