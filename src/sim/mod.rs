pub mod logind;
