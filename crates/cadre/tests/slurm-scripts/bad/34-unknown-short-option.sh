#!/bin/bash
#SBATCH -Z
echo done
