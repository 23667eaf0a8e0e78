#!/bin/bash

# a comment
  #SBATCH -N 3
#SBATCH-N 2
#SBATCH	--time=5 # trailing comment
#sbatch -t 7
echo done
