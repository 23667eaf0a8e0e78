#!/bin/bash
#SBATCH --mem=10G
echo done
