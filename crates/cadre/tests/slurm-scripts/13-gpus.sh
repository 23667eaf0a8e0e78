#!/bin/bash
#SBATCH --gpus=4
echo done
