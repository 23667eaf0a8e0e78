#!/bin/bash
#SBATCH --gres=gpu:a100:2
echo done
