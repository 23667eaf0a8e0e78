#!/bin/bash
#SBATCH --mem=10X
echo done
