#!/bin/bash
#SBATCH --comment="hi there"
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=a@b
echo done
