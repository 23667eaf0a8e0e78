#!/bin/bash
#SBATCH -n 4
#SBATCH -c 40
echo done
