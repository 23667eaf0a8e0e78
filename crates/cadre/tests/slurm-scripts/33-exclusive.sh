#!/bin/bash
#SBATCH --exclusive
echo done
