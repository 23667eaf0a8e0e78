#!/bin/bash
#SBATCH --nice=5
echo done
