#!/bin/bash
#SBATCH --gres=gpu:1,gpu:a100:1
echo done
