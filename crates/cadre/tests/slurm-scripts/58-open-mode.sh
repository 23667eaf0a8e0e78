#!/bin/bash
#SBATCH --open-mode=append
echo done
