#!/bin/bash
#SBATCH --time=1:30
echo done
