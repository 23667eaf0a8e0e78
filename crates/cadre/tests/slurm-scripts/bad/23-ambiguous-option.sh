#!/bin/bash
#SBATCH --ntasks-per=2
echo done
