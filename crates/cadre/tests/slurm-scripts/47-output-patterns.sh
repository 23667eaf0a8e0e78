#!/bin/bash
#SBATCH -J named
#SBATCH --output=out-%x-%u-%N-%5j-%%-%A_%a.txt
echo done
