#!/bin/bash
#SBATCH --mem-per-cpu=1.5G
echo done
