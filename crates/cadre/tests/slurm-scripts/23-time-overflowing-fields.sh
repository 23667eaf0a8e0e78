#!/bin/bash
#SBATCH --time=1-1:60:15
echo done
