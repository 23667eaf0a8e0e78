#!/bin/bash
#SBATCH --time=0
echo done
