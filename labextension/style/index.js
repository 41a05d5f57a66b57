import './base.css';
import './kernels.css';
