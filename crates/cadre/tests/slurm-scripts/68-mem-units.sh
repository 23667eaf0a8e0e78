#!/bin/bash
#SBATCH --mem=2560
echo done
