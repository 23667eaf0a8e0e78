#!/bin/bash
#SBATCH -d 1:2
echo done
