#!/bin/bash
#SBATCH -o out-%j.txt
#SBATCH -e err-%j.txt
echo done
