#!/bin/bash
#SBATCH -N 2
echo done
