#!/bin/bash
#SBATCH -N 3
#SBATCH -n 2
echo done
