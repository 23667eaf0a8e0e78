#!/bin/bash
#SBATCH --gres=mps:100
echo done
