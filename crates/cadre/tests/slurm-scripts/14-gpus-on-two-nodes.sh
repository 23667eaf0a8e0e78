#!/bin/bash
#SBATCH -G 4
#SBATCH -N 2
echo done
