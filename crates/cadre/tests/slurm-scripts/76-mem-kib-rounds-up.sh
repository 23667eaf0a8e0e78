#!/bin/bash
#SBATCH --mem=100K
echo done
