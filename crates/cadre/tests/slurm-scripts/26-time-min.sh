#!/bin/bash
#SBATCH --time=2:00:00
#SBATCH --time-min=30
echo done
