#!/bin/bash
#SBATCH -N 3-2
echo done
