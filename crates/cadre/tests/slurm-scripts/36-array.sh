#!/bin/bash
#SBATCH --array=1-3
echo done
