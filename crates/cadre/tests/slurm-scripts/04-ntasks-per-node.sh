#!/bin/bash
#SBATCH --ntasks-per-node=4
echo done
