#!/bin/bash
#SBATCH --time
echo done
