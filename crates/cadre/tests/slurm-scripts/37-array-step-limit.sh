#!/bin/bash
#SBATCH --array=0-9:3%2
echo done
