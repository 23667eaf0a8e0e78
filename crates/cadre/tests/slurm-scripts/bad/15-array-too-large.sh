#!/bin/bash
#SBATCH --array=0-2000
echo done
