#!/bin/bash
#SBATCH --mem=1G
#SBATCH --mem-per-cpu=1G
echo done
