#!/bin/bash
#SBATCH -J "my job"
echo done
