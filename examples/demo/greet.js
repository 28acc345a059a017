// The quickstart's demo project: Spark's scripted demo model changes this file.
function greet() {
  return "hello";
}

console.log(greet());
