#!/bin/bash
#SBATCH --time=UNLIMITED
echo done
