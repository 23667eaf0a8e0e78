#!/bin/bash
#SBATCH -n 100
echo done
