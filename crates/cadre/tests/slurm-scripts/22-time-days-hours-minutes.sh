#!/bin/bash
#SBATCH --time=1-12:30
echo done
