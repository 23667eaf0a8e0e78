#!/bin/bash
#SBATCH --time=2-3
echo done
